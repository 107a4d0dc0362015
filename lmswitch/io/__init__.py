"""Reading and writing: documents, package data, the one parser for switch settings."""
