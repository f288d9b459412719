"""What the control plane shows of itself: Prometheus metrics, logging and safe log text,
readiness, usage and fair-share views, and experiment tracking (TensorBoard, MLflow).
"""
