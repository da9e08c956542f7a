"""Checkpoints, from the loop to the store and back.

`manager` is what the loop talks to: `checkpoint_file` is one file (fixed keys,
atomic, sha256), `writer` writes it off the training thread, `sync` uploads it and
mirrors the run dir in the store's `layout`, `resume` picks the checkpoint a run
continues from, `final_upload` sends what a finished run still owes the store, and
`uploader_lock` keeps a run dir to one uploader at a time.
Each module imports only those before it in that list's dependency order:
`checkpoint_file` <- `resume` <- `manager`, never back.
"""
