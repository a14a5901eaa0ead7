//! TODO(skeleton): files
