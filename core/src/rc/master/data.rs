//! The publish/lookup data server and fences, run at the master (thesis §6.4.2 uses
//! PMIx publish/lookup/fence; `RC-16`).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

use super::phase3::accept_key;
use super::{Fence, Master, Route};
use crate::pset::PsetName;
use crate::rc::error::RcError;
use crate::rc::msg::ClientReply;
use crate::rc::types::RcStatus;
use crate::time::{Duration, Instant};

/// Whether applications may not publish `key` themselves: the protocol's own keys,
/// `{delta}:accept` and `{delta}:confirm` of a pset name (`RC-16`). Only those: MPI
/// libraries publish keys of their own that may end the same way (Open MPI's
/// connect/accept publishes `{jobid}:{tag}:accept`).
pub(crate) fn is_reserved(key: &str) -> bool {
    key.strip_suffix(":accept")
        .or_else(|| key.strip_suffix(":confirm"))
        .is_some_and(|pset| pset.starts_with("mpi://"))
}

impl Master {
    /// Publishes a key; never overwrites. `from_client` keys may not be the protocol's.
    pub(crate) fn publish(
        &mut self,
        _now: Instant,
        key: &str,
        value: String,
        from_client: bool,
    ) -> Result<(), RcError> {
        if from_client && is_reserved(key) {
            return Err(RcError::ReservedKey(String::from(key)));
        }
        if self.data.contains_key(key) {
            return Err(RcError::KeyExists(String::from(key)));
        }
        self.data.insert(String::from(key), value.clone());
        let (hit, rest): (Vec<_>, Vec<_>) = core::mem::take(&mut self.lookups)
            .into_iter()
            .partition(|(k, _, _)| k == key);
        self.lookups = rest;
        for (_, _, route) in hit {
            self.reply(&route, ClientReply::Lookup(Ok(value.clone())));
        }
        Ok(())
    }

    /// Removes a key an application published (`RC-16`); the protocol's own keys are
    /// the master's to remove (`RC-19`).
    pub(crate) fn unpublish(&mut self, key: &str) -> Result<(), RcError> {
        if is_reserved(key) {
            return Err(RcError::ReservedKey(String::from(key)));
        }
        match self.data.remove(key) {
            Some(_) => Ok(()),
            None => Err(RcError::NoSuchKey(String::from(key))),
        }
    }

    /// Looks a key up, parking the request until it is published or `wait` passes.
    /// The accept key of an aborted change fails at once (`RC-12`).
    pub(crate) fn lookup(
        &mut self,
        now: Instant,
        route: Route,
        key: String,
        wait: Option<Duration>,
    ) {
        if let Some(v) = self.data.get(&key) {
            let v = v.clone();
            return self.reply(&route, ClientReply::Lookup(Ok(v)));
        }
        if let Some(err) = self.aborted_key(&key) {
            return self.reply(&route, ClientReply::Lookup(Err(err)));
        }
        match wait {
            Some(w) => self.lookups.push((key, now + w, route)),
            None => self.reply(&route, ClientReply::Lookup(Err(RcError::NoSuchKey(key)))),
        }
    }

    fn aborted_key(&self, key: &str) -> Option<RcError> {
        self.changes
            .iter()
            .find(|(d, c)| c.info.status == RcStatus::Aborted && accept_key(d) == key)
            .map(|(d, _)| RcError::Aborted(d.clone()))
    }

    /// Enters the caller into the fence over `pset`; when every member is in, all are
    /// released (`RC-16`).
    pub(crate) fn fence(&mut self, now: Instant, route: Route, pset: PsetName, timeout: Duration) {
        let origin = self.origin(&route.pid);
        // Membership by index, not by listing the pset's members: each arrival costs a
        // lookup, so a fence over n processes costs O(n log n), not O(n²) (issue 29).
        let is_member = match self.registry.resolve(&origin, &pset) {
            Ok((members, _)) => {
                (self.registry.table().index_of(&route.pid)).is_some_and(|i| members.contains(i))
            }
            Err(e) => return self.reply(&route, ClientReply::Fence(Err(e.into()))),
        };
        if !is_member {
            let err = RcError::NotPermitted(route.pid.clone());
            return self.reply(&route, ClientReply::Fence(Err(err)));
        }
        let registry = &self.registry;
        let fence = self.fences.entry(pset.clone()).or_insert_with(|| Fence {
            members: (registry.members(&origin, &pset).unwrap_or_default())
                .into_iter()
                .collect::<BTreeSet<_>>(),
            arrived: BTreeMap::new(),
            deadline: now + timeout,
        });
        fence.arrived.insert(route.pid.clone(), route);
        // Only once as many have arrived as there are members can all of them have: the
        // full check runs then, not on every arrival.
        if fence.arrived.len() >= fence.members.len()
            && fence.members.iter().all(|m| fence.arrived.contains_key(m))
        {
            let done = self.fences.remove(&pset).expect("present");
            for route in done.arrived.into_values() {
                self.reply(&route, ClientReply::Fence(Ok(())));
            }
        }
    }

    /// Fails the lookups and fences that can no longer succeed because `delta` was
    /// aborted.
    pub(crate) fn fail_waiting_on(&mut self, delta: &PsetName) {
        let key = accept_key(delta);
        let (hit, rest): (Vec<_>, Vec<_>) = core::mem::take(&mut self.lookups)
            .into_iter()
            .partition(|(k, _, _)| *k == key);
        self.lookups = rest;
        for (_, _, route) in hit {
            self.reply(
                &route,
                ClientReply::Lookup(Err(RcError::Aborted(delta.clone()))),
            );
        }
        if let Some(f) = self.fences.remove(delta) {
            for route in f.arrived.into_values() {
                self.reply(
                    &route,
                    ClientReply::Fence(Err(RcError::Aborted(delta.clone()))),
                );
            }
        }
    }

    /// Lookups and fences past their deadline fail with `Timeout`.
    pub(crate) fn expire_data(&mut self, now: Instant) {
        let (due, rest): (Vec<_>, Vec<_>) = core::mem::take(&mut self.lookups)
            .into_iter()
            .partition(|(_, d, _)| *d <= now);
        self.lookups = rest;
        for (_, _, route) in due {
            self.reply(&route, ClientReply::Lookup(Err(RcError::Timeout)));
        }
        let due: Vec<PsetName> = self
            .fences
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for pset in due {
            let f = self.fences.remove(&pset).expect("present");
            for route in f.arrived.into_values() {
                self.reply(&route, ClientReply::Fence(Err(RcError::Timeout)));
            }
        }
    }
}
