//! TODO(skeleton): exec
