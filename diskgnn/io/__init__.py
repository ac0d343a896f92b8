"""Reading bytes off disk: row gathers and range reads through the native io_uring/O_DIRECT reader.

`reader` holds `FileReader` (any file: rows by id or byte ranges, sync or
async, backends io_uring, pread, mmap or kvikio, `auto` picking and saying
why) and `FeatureReader`/`open_features` (a dataset's stored feature rows as
torch tensors); `backends` holds the two backends written in Python. The
native side (native/reader.h) coalesces rows into aligned reads.
"""
