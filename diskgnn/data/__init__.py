"""The dataset on disk: its format, the inputs it is prepared from, and its quantized variants.

`format` defines dataset format v1 (manifest, raw 4 KiB-aligned array files)
and opens datasets; `files` writes every file that matters atomically and with
a checksum; `sources/` reads each input kind in chunks, `csc` sorts edges into
the CSC topology with bounded memory and `splits` checks or draws the splits,
all driven by `prepare`; `verify` re-checks everything streaming; `quantize/`
stores compact code rows beside the features, and `features` names the rows
training moves (features.bin or a variant) with their decoder. Nothing here
imports torch except where a decoder makes tensors.
"""
