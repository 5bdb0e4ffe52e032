"""The seed's own setting (``select --per-operator``): a primitive per ONNX operator, in a layout, run layer
by layer, with layout conversions paid between them (QS-DNN as its authors evaluated it)."""
