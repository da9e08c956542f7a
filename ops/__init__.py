"""What runs on the user's machine: `fab` tasks and what they need."""
