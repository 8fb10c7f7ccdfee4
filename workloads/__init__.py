"""epochscope workloads: bundled ResNet-50 trainings that emit run/epoch/step events."""
