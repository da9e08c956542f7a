"""The trainer image: `build` (its tag, build and push here), `registry` (short-lived
registry logins), `shipping` (onto the boxes: pulled from the registry, or `docker save |
docker load` over SSH without one)."""
