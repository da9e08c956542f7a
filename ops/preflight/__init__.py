"""`fab preflight`, will `pulumi up` of this stack work: `checks` (the stack file, then
the cloud), one module per cloud (`aws`, `azure`: quotas, rights, budgets), `findings`
(problems with their fixes, and notes)."""
