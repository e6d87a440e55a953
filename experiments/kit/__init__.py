"""What every experiment and benchmark shares: command lines, a process pool, one statistics
module, markdown tables, database set-up and the result files."""
