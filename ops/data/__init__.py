"""Datasets and runs between this machine and the stack's storage: `transfer` (up and
down through `trainer.storage`), `download_verdict` (what `fab download` verified and
whether `pulumi destroy` is safe)."""
