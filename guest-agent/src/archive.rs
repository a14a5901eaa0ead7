//! TODO(skeleton): archive
