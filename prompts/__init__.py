"""kernelscout: prompts."""
