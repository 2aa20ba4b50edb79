"""Member accounts."""


def create_member(name, email):
    """A new member account."""
    return {'name': name, 'email': email, 'active': True}


def deactivate_member(member):
    """Close a member's account."""
    member['active'] = False
    return member
