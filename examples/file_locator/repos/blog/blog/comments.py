"""Comments on posts."""


def add_comment(post, text, user):
    """Add a comment to a post."""
    post.setdefault('comments', []).append({'text': text, 'user': user, 'hidden': False})
    return post


def hide_comment(comment):
    """Hide a comment from readers."""
    comment['hidden'] = True
    return comment
