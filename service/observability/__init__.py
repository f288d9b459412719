"""What the control plane shows of itself: Prometheus metrics, logging, readiness,
usage and fair-share views, and experiment tracking (TensorBoard, MLflow).
"""
