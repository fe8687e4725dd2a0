"""The one exception type the command line turns into a one-line message."""


class BytecanaryError(Exception):
    """Bad input a user can fix (config, file, checkpoint): the message names what and where."""
