package llmflow

// Where a role grant (or a user) comes from. Slurm is the source of who
// administers (issue 11): the Slurm import grants what Slurm says
// (coordinators, user associations) as SourceSlurm and removes those
// grants again when Slurm no longer says so; a grant made by hand through
// the admin API is SourceAdmin and the import never touches it.
const (
	SourceAdmin = "admin"
	SourceSlurm = "slurm"
)

// RoleOp is one kind of change the Slurm import makes to who administers.
type RoleOp uint8

const (
	// OpCreateUser creates the user (a Slurm user gaining its first role).
	OpCreateUser RoleOp = iota + 1
	// OpEnableUser re-enables a user the import disabled (back in Slurm);
	// its old admin tokens stay revoked.
	OpEnableUser
	// OpGrant grants Grant with SourceSlurm (a grant held already, by hand
	// or not, is kept as it is).
	OpGrant
	// OpRevoke removes Grant if it is a SourceSlurm grant.
	OpRevoke
	// OpDisableUser disables the user and revokes its admin tokens, unless
	// it holds a role granted by hand (a user removed from Slurm).
	OpDisableUser
)

func (o RoleOp) String() string {
	switch o {
	case OpCreateUser:
		return "create-user"
	case OpEnableUser:
		return "enable-user"
	case OpGrant:
		return "grant"
	case OpRevoke:
		return "revoke"
	case OpDisableUser:
		return "disable-user"
	}
	return "RoleOp(?)"
}

// RoleChange is one change of users and roles a Slurm import applies,
// with the reason it shows (why the grant exists in Slurm).
type RoleChange struct {
	Op    RoleOp
	User  string
	Grant RoleGrant // OpGrant, OpRevoke: Role, Org (organisation roles) or Team (team roles)
	Why   string
}
