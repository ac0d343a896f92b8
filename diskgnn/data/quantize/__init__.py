"""Quantized features (BiFeat): a dataset's float rows stored again as compact code rows.

`spec` parses what users write (`sq8`, `lin4`, `vq:w=16,L=2048`); `bits` packs
symbols into code rows; `base` is the quantizer interface and the table-gather
decoding every kind shares; `scalar` and `product` fit and encode (log-domain
and linear scalar quantization, product quantization); `quantizers` makes one by
spec; `variants` writes, loads and checks a variant's files inside a dataset;
`cli` is `python -m diskgnn.quantize`. Training reads a variant through
`diskgnn.data.features.feature_source` and decodes its rows last, on the device.
"""
