"""After a search: evidence, the approval gate, the registry, revalidation and export."""
