"""kernelscout: agent."""
