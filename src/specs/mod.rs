//! A plan written for others to apply: the CDI spec ([`cdi`]) and the hook
//! it calls back ([`callback`]), the runtime wrapper's `config.json` edits
//! ([`runtime`]), and the engines' own configuration files
//! ([`engine_config`]).

pub mod cdi;
pub mod cdi_hook_args;
pub mod engine_config;
pub mod runtime;
