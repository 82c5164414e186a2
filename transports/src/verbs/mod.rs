//! InfiniBand verbs device (feature `verbs`).
