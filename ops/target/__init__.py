"""Which box `fab` drives: `resolve` (the stack's outputs, a target file or this machine),
`schema` (every key's type and form, checked once), `local` (the local target),
`guard_rails` (which guard rails a target's boxes have)."""
