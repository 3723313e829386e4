//! What a partition key grows with, discovered from the traffic, not from today's key
//! layout: the meter knows the ids it made (events, endpoints, tenants) and finds them in
//! key values and request bodies.
//!
//! A key is classified by the most specific id **named in its value** (an event's id in
//! `evt_1`, `evt_1#7`; an endpoint's in `log#ep_1`, `tnt_1#ep_1#3`; a tenant's alone in
//! `tnt_1`): a key named after one event is written only for that event, so its traffic is
//! bounded by that event's, and so on. A key whose value names none of them (a hash, a
//! shard number, a time bucket) is classified by the ids **every request on it** named:
//! one event, else one endpoint, else one tenant; a key that no single id explains is
//! shared by all traffic.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

/// What a key's traffic grows with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Group {
    /// One event's fan-out.
    Event(String),
    /// One endpoint's traffic.
    Endpoint(String),
    /// One tenant's traffic.
    Tenant(String),
    /// All traffic (no single event, endpoint or tenant explains it).
    Shared,
}

impl Group {
    /// `one event`, `one endpoint`, `one tenant`, `shared`.
    pub fn label(&self) -> &'static str {
        match self {
            Group::Event(_) => "one event",
            Group::Endpoint(_) => "one endpoint",
            Group::Tenant(_) => "one tenant",
            Group::Shared => "shared",
        }
    }
}

/// How a key's group was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Basis {
    /// An id in the key's value.
    NamedInKey,
    /// The ids every request on the key named.
    CommonToRequests,
    /// Nothing singled it out.
    Nothing,
}

/// Kinds of id the meter makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// An event id.
    Event,
    /// An endpoint id.
    Endpoint,
    /// A tenant id.
    Tenant,
}

/// The ids of one scenario.
#[derive(Debug, Clone, Default)]
pub struct Ids {
    kinds: HashMap<String, IdKind>,
}

/// The ids a text names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Mentions {
    /// Event ids.
    pub events: BTreeSet<String>,
    /// Endpoint ids.
    pub endpoints: BTreeSet<String>,
    /// Tenant ids.
    pub tenants: BTreeSet<String>,
}

/// Tern's ids are `[A-Za-z0-9_-]` (`tern_core::ids`); anything else separates them
/// (`#`, `.`, `:`, quotes, `/`).
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .filter(|t| !t.is_empty())
}

impl Ids {
    /// Registers an id.
    pub fn add(&mut self, kind: IdKind, id: &str) {
        self.kinds.insert(id.to_owned(), kind);
    }

    /// The registered ids `text` names.
    pub fn mentions(&self, text: &str) -> Mentions {
        let mut m = Mentions::default();
        for t in tokens(text) {
            match self.kinds.get(t) {
                Some(IdKind::Event) => m.events.insert(t.to_owned()),
                Some(IdKind::Endpoint) => m.endpoints.insert(t.to_owned()),
                Some(IdKind::Tenant) => m.tenants.insert(t.to_owned()),
                None => false,
            };
        }
        m
    }
}

impl Mentions {
    /// The most specific single id: one event, else one endpoint, else one tenant.
    pub fn most_specific(&self) -> Option<Group> {
        let one = |s: &BTreeSet<String>| (s.len() == 1).then(|| s.iter().next().cloned());
        if let Some(Some(e)) = one(&self.events) {
            return Some(Group::Event(e));
        }
        if let Some(Some(e)) = one(&self.endpoints) {
            return Some(Group::Endpoint(e));
        }
        if let Some(Some(t)) = one(&self.tenants) {
            return Some(Group::Tenant(t));
        }
        None
    }

    /// Keeps only what `other` names too.
    pub fn intersect(&mut self, other: &Mentions) {
        self.events.retain(|e| other.events.contains(e));
        self.endpoints.retain(|e| other.endpoints.contains(e));
        self.tenants.retain(|t| other.tenants.contains(t));
    }
}

/// The ids every request on a key named, built one request at a time.
#[derive(Debug, Clone, Default)]
pub struct Common(Option<Mentions>);

impl Common {
    /// Adds one request's mentions.
    pub fn add(&mut self, m: &Mentions) {
        match &mut self.0 {
            None => self.0 = Some(m.clone()),
            Some(c) => c.intersect(m),
        }
    }

    /// What all of them named (empty before the first).
    pub fn get(&self) -> Mentions {
        self.0.clone().unwrap_or_default()
    }
}

/// The group of a key: named in its value (`key`), else common to its requests.
pub fn classify(key: &Mentions, common: &Mentions) -> (Group, Basis) {
    if let Some(g) = key.most_specific() {
        return (g, Basis::NamedInKey);
    }
    if let Some(g) = common.most_specific() {
        return (g, Basis::CommonToRequests);
    }
    (Group::Shared, Basis::Nothing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Ids {
        let mut ids = Ids::default();
        ids.add(IdKind::Event, "evt_a_1");
        ids.add(IdKind::Event, "evt_a_2");
        ids.add(IdKind::Endpoint, "ep_a_1");
        ids.add(IdKind::Endpoint, "ep_a_2");
        ids.add(IdKind::Tenant, "tnt_a");
        ids
    }

    fn class(key: &str, requests: &[&str]) -> (Group, Basis) {
        let ids = ids();
        let mut common = Common::default();
        for r in requests {
            common.add(&ids.mentions(r));
        }
        classify(&ids.mentions(key), &common.get())
    }

    #[test]
    fn ids_are_found_as_whole_tokens_only() {
        let ids = ids();
        let m = ids.mentions(r#"{"pk":{"S":"tnt_a#ep_a_1"},"d":"evt_a_1.ep_a_2","x":"ep_a_10"}"#);
        assert_eq!(m.tenants.len(), 1);
        assert_eq!(m.endpoints.len(), 2, "ep_a_10 is not ep_a_1: {m:?}");
        assert_eq!(m.events.len(), 1);
        assert_eq!(ids.mentions("evt_a_1x ep_a tnt_ab"), Mentions::default());
    }

    #[test]
    fn a_key_is_classified_by_the_most_specific_id_it_names() {
        // Today's layouts and the sharded ones branch `keys` plans: the same answers.
        assert_eq!(class("evt_a_1", &[]).0, Group::Event("evt_a_1".into()));
        assert_eq!(class("evt_a_1#7", &[]).0, Group::Event("evt_a_1".into()));
        assert_eq!(class("log#ep_a_2", &[]).0, Group::Endpoint("ep_a_2".into()));
        assert_eq!(
            class("tnt_a#ep_a_1#3", &[]),
            (Group::Endpoint("ep_a_1".into()), Basis::NamedInKey)
        );
        assert_eq!(class("tnt_a", &[]).0, Group::Tenant("tnt_a".into()));
    }

    #[test]
    fn a_key_naming_nothing_takes_what_its_requests_had_in_common() {
        // A hashed shard written for two events of one endpoint: grows with the endpoint.
        assert_eq!(
            class(
                "shard-3",
                &[
                    "evt_a_1 ep_a_1 tnt_a",
                    "evt_a_2 ep_a_1 tnt_a",
                    "ep_a_1 tnt_a"
                ]
            ),
            (Group::Endpoint("ep_a_1".into()), Basis::CommonToRequests)
        );
        // Two endpoints of one tenant: the tenant.
        assert_eq!(
            class(
                "bucket-9",
                &["evt_a_1 ep_a_1 tnt_a", "evt_a_1 ep_a_2 tnt_a"]
            )
            .0,
            Group::Event("evt_a_1".into()),
            "one event's fan-out over two endpoints is that event's"
        );
        assert_eq!(
            class(
                "bucket-9",
                &["evt_a_1 ep_a_1 tnt_a", "evt_a_2 ep_a_2 tnt_a"]
            )
            .0,
            Group::Tenant("tnt_a".into())
        );
        // Nothing in common, or nothing named at all: shared by all traffic.
        assert_eq!(
            class("global", &["evt_a_1 ep_a_1 tnt_a", "other"]),
            (Group::Shared, Basis::Nothing)
        );
        assert_eq!(class("global", &[]).0, Group::Shared);
    }
}
