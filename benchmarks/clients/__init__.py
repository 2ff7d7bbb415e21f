"""One runner per client; each prints one JSON result line (see ``_common``)."""
