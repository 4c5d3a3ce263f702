"""kernelscout: knowledge."""
