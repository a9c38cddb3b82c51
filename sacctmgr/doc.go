// Package sacctmgr parses what Slurm's sacctmgr prints about associations
// into a Tree, without running anything: it is pure (no os/exec, net or
// database; TestDeps enforces it). Running the command belongs to package
// slurmsync.
//
// # Inputs
//
// ParseAssociations reads the parsable forms of
//
//	sacctmgr show assoc [tree] [withdeleted] [onlydefaults] [format=…]
//	sacctmgr show account withassoc
//	sacctmgr show user withassoc
//
// in --parsable2 (-P: '|' between fields), --parsable (-p: also a '|' at the
// end of every line) and --noheader (-n: Options.Columns names the columns)
// forms, with any subset and order of columns. Columns are found by their
// header (display) names, which differ from the format= keys: Share (format
// Fairshare or Share), ParentName, ParentID, ID, LFT, RGT, Def Acct, Descr,
// Org. Options.Columns accepts either spelling. The table form (no -P/-p) is
// rejected: it pads and truncates fields.
//
// ParseAccounts reads "sacctmgr show account" (descriptions and
// organizations, no tree); ParseDump reads the file written by
// "sacctmgr dump <cluster> file=…".
//
// # Parents
//
// A user association's parent is its account. An account's parent comes,
// in this order of preference, from the ParentName column; else from the ID
// and ParentID columns; else from the LFT/RGT nested set; else from the
// indentation of the Account field in a "tree" listing (one space per
// depth). The default "show assoc" columns carry none of these: such a
// listing is an error ("no parent information") unless Options.Partial is
// set, in which case accounts keep an empty Parent. Ask sacctmgr for
// format=Cluster,Account,User,Partition,Share,ParentName.
//
// # Unescaped '|'
//
// sacctmgr never escapes fields: a '|' in a description adds a field. A line
// with more fields than columns is recovered by joining the extra fields
// into the one free-text column (Descr or Org) when the listing has exactly
// one, or the column named by Options.PipeColumn; otherwise it is an error
// naming the line. Every error from the parsers is a *ParseError carrying the
// line number ("line 7: …").
//
// # What each form lacks
//
//   - default "show assoc" columns: parents (Options.Partial), descriptions,
//     organizations, default accounts;
//   - "show assoc format=…,ParentName": descriptions, organizations, default
//     accounts (add them with Tree.Annotate from ParseAccounts and a
//     "show user withassoc" parse);
//   - "show account withassoc": partitions (a user's several partition
//     associations in one account collapse into one row when they are
//     identical, and are an error when they differ);
//   - "show user withassoc": account rows (Options.Partial);
//   - the dump: deleted associations; root's description and organization
//     (Slurm's defaults are filled in);
//   - every sacctmgr form: the deleted flag (MergeDeleted compares a plain
//     and a withdeleted listing).
package sacctmgr
