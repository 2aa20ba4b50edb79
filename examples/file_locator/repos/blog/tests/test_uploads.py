"""Tests of media/uploads.py."""

from media.uploads import save_upload, thumbnail_path


def test_save_upload():
    result = save_upload('a.png', b'')
    assert result is not None


def test_thumbnail_path():
    result = thumbnail_path('uploads/a.png')
    assert result is not None
