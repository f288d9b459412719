"""Hyperparameter sweeps: trials as jobs, searched by Optuna (`study`), run by
the controller's pass in the supervisor's loop (`controller`), served to the
API by `service.SweepService` (`supervisor.sweeps`)."""
