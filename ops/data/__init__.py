"""Datasets and runs between this machine, the stack's storage and the box: `transfer`
(up and down through `trainer.storage`), `download_verdict` (what `fab download` verified
and whether `pulumi destroy` is safe), `prepare` (`fab prepare-data` on the box)."""
