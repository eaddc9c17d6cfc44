"""Progressive rollouts as registry objects: their audited writes and their status."""
