"""Tags on posts."""


def tag_post(post, tag):
    """Add a tag to a post."""
    post.setdefault('tags', set()).add(tag.lower())
    return post


def posts_with_tag(posts, tag):
    """The posts carrying a tag."""
    return [p for p in posts if tag in p.get('tags', ())]
