"""A run's own copy on its box: the files its trainer uploads, read over SSH.

`fab download` checks the files it fetched against their sha256 here (and calls those
storage lacks "only on the box"); `fab status` names the files a finished run has not
got into storage yet. The files are those box/unfinished_uploads.py's `expected_files`
counts on the box: every regular file but dot files and what is under a dot folder,
`*.tmp` and `*.damaged`, checkpoints/'s last.pt and best.pt (links, uploaded under their
step files' names) with their records, and `fab`'s own launch.json and STOPPED_BY_USER.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from box import contract, unfinished_uploads
from ops.remote.boxes import AnyBox
from stack import storage_layout


def _find(run_dir: str, action: str) -> str:
    """`find` in `run_dir` of the files its trainer uploads, each given to `action`: the
    rule of box/unfinished_uploads.py's `expected_files`, built from its names so that
    the two cannot drift apart."""
    checkpoints = f"./{contract.CHECKPOINTS_DIR}"
    left_out = [
        *(("-name", f"*{suffix}") for suffix in unfinished_uploads.NOT_STORED_SUFFIXES),
        *(("-path", f"{checkpoints}/{link}*") for link in unfinished_uploads.LINKS),
        *(("-name", name) for name in unfinished_uploads.BOX_OWN),
    ]
    clauses = " ".join(f"! {test} {shlex.quote(pattern)}" for test, pattern in left_out)
    return (
        f"cd {shlex.quote(run_dir)} && find . \\( -name '.?*' \\) -prune -o -type f "
        f"{clauses} {action}"
    )


def file_hashes(box: AnyBox, run_id: str) -> dict[str, str]:
    """{path in the run dir: sha256} of the run's files on `box` ({} where it has none)."""
    run_dir = contract.run_dir(box.root, run_id)
    listing = box.run(_find(run_dir, "-exec sha256sum {} +"), check=False)
    return parse_sha256sum(listing.stdout.splitlines())


def file_names(box: AnyBox, run_id: str) -> list[str]:
    """The paths in the run dir of the run's files on `box`, sorted ([] where none)."""
    run_dir = contract.run_dir(box.root, run_id)
    listing = box.run(_find(run_dir, "-print0"), check=False)
    return sorted(name.removeprefix("./") for name in listing.stdout.split("\0") if name)


def not_in_storage(box: AnyBox, run_id: str) -> list[str]:
    """The run's files on `box` that its folder in storage lacks, but status.json (the
    record of how the run stands, which storage has whenever it answered once); any
    error of the store's is the caller's to say."""
    from trainer.storage import open_store

    stored = set(open_store(storage_layout.run_uri(box.target.storage_uri, run_id)).list())
    names = file_names(box, run_id)
    return [name for name in names if name not in stored and name != contract.STATUS_FILE]


def parse_sha256sum(lines: Iterable[str]) -> dict[str, str]:
    """`sha256sum` output (`HASH  ./path`) as {relative path: hash}."""
    hashes = {}
    for line in lines:
        digest, _, name = line.strip().partition("  ")
        if digest and name:
            hashes[name.removeprefix("./")] = digest
    return hashes
