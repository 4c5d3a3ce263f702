"""The search room: session, config, tree policy, stopping rule, executors, write-back, report."""
