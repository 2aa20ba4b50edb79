"""Uploaded images and files."""

FILES: dict = {}


def save_upload(name, data, folder='uploads'):
    """Store an uploaded file."""
    path = f'{folder}/{name}'
    FILES[path] = data
    return path


def thumbnail_path(path):
    """Where the thumbnail of an image is stored."""
    return path.rsplit('.', 1)[0] + '_thumb.png'
