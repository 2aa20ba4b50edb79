"""Password hashing."""

import hashlib


def hash_password(password):
    """A salted hash of a password."""
    return hashlib.sha256(('salt' + password).encode()).hexdigest()


def check_password(password, hashed):
    """Whether a password matches its hash."""
    return hash_password(password) == hashed
