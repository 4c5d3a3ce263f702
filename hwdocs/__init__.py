"""kernelscout: hwdocs."""
