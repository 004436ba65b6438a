"""What every layer may use: byte and time units, JSON reading, the cores this
process may run on, import hooks, and what a launcher (torchrun, Slurm) says."""
