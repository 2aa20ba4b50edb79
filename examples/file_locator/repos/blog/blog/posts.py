"""Blog posts."""


def create_post(title, body, author):
    """A new draft post."""
    return {'title': title, 'body': body, 'author': author, 'published': False}


def publish_post(post):
    """Make a draft post public."""
    post['published'] = True
    return post
