//! TODO(skeleton): system
