//! A plan written for others to apply: the CDI spec ([`cdi`]) and the hook
//! it calls back ([`callback`]), the runtime wrapper's `config.json` edits
//! ([`runtime`]), and the engines' own configuration files
//! ([`engine_config`]).

pub mod callback;
pub mod cdi;
pub mod engine_config;
pub mod runtime;
