"""``workloads infer``: ResNet-50 inference, FP32 against INT8, with ONNX Runtime.

The study's section V measured TensorRT on a V100: images/s at several batch sizes in FP32
and INT8 and the top-1 each keeps. This package does the same on whatever the node has:

1. ``model``: the PyTorch ResNet-50 of the bundled workload (a run's last checkpoint, or
   freshly initialised weights, said so plainly) exported to ONNX;
2. ``model``: an INT8 copy by ONNX Runtime's static quantisation, its activation ranges
   calibrated on a slice of the *training* split (never the validation images);
3. ``measure``: for every batch size, FP32 and INT8 side by side: warm-up batches, then
   timed batches (images/s is the training rule, ``contract.throughput``: timed images over
   timed seconds, warm-up out) with their latency percentiles; top-1 on the validation split;
4. ``command``: the run's events (``contract.schema`` ``inference``) through the training
   events' delivery, optionally with an embedded collector and agent (``--profile``).

onnx and onnxruntime are the ``infer`` extra: agent, collector and dashboard never import
this package.
"""
