"""Built-in workloads. Data ships with packages or is generated; nothing is downloaded.

Each module exposes ``WORKLOAD``, a :class:`hpsearch.train.Workload`:

* :mod:`hpsearch.workloads.digits`: MLP on scikit-learn's bundled 8x8 digits; an epoch
  takes about 20 ms on one CPU core. Metric ``val_accuracy``.
* :mod:`hpsearch.workloads.charlm`: byte-level GPT (0.12M parameters) on the Python
  standard library's own source; an epoch takes about 2 s on one CPU core. Metric
  ``val_loss`` (nats per byte) and ``val_bits_per_byte``.
"""
