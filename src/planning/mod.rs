//! What a container asks and what it gets: the request grammar
//! ([`request`], [`require`], [`device_class`]), what a container's bundle
//! and image say ([`bundle`], [`image`], [`userns`]), the one [`planner`]
//! and the [`plan`] it makes, pure data.

pub mod bundle;
pub mod compat_rule;
pub mod device_class;
pub mod image;
pub mod plan;
pub mod planner;
pub mod request;
pub mod require;
pub mod userns;
