"""The kernel: values and errors every part of icetail may import (it imports none of them)."""
