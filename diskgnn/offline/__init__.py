"""The offline phase: every batch of an epoch sampled, its hot rows placed in memory and its cold rows packed.

`sample` samples an epoch's mini-batches (native, threaded) into a checksummed
sample file; `placement` counts each row's future accesses and picks the rows
each memory tier holds; `pack` writes every batch's cold rows contiguously in
one sequential pass over the features; `epochs` runs these per epoch, the next
one in the background while the current one trains. Training then reads one
contiguous range per batch instead of one random block per row.
"""
