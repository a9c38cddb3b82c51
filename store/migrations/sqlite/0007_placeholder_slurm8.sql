-- Placeholder of issue 8 (branch slurm8) for the migrations other branches add
-- as 0007; delete at merge (0009 is slurm8's).
SELECT 1;
