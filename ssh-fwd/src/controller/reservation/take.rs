//! Taking a port: a reservation created only if absent, after deleting
//! the port's quarantined one when the pick ([`ports::pick`]) fell on it;
//! the webhook's loop over the range ([`reserve_free`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    ops::RangeInclusive,
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{DeleteParams, Preconditions},
};

use super::{Holder, Reservation, build};
use crate::{controller::ports, vocabulary};

/// Creates `lease` only if its name is free: `Ok(true)` when this call made
/// it, `Ok(false)` when the port is already reserved (409 AlreadyExists).
pub async fn create(api: &Api<Lease>, lease: &Lease) -> Result<bool, kube::Error> {
    match crate::k8s::answer::create(api, lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes the quarantined reservation `r` so that its port can be
/// reserved anew, only if it is still the one read (uid and
/// resourceVersion): `Ok(true)` when it is gone (by this call or another),
/// `Ok(false)` when it changed since (someone else took the port).
pub async fn reclaim(api: &Api<Lease>, r: &Reservation) -> Result<bool, kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: r.uid.clone(),
            resource_version: r.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&r.name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(true),
        Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}

/// `holder`'s reservation of the port `pick` chose; one taken from a
/// quarantine that gave way records when ([`vocabulary::QUARANTINE_CUT`]),
/// for the pod to be told.
pub fn build_picked(ip: IpAddr, pick: &ports::Pick, holder: &Holder) -> Lease {
    let mut lease = build(ip, pick.port(), holder);
    if let ports::Pick::Resting {
        since, early: true, ..
    } = pick
    {
        (lease.metadata.annotations.get_or_insert_default())
            .insert(vocabulary::QUARANTINE_CUT.into(), since.to_string());
    }
    lease
}

/// Why no port could be reserved.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    #[error("every port of {}-{} is taken", .0.start(), .0.end())]
    Full(RangeInclusive<u16>),
    #[error("reserving port {port}: {source}")]
    Api {
        port: u16,
        #[source]
        source: kube::Error,
    },
}

/// Reserves a port of `range` for `holder`, chosen by [`ports::pick`] (the
/// one allocation rule) from the reservations `watched`: a free one,
/// created only if absent, else the one quarantined longest, reclaimed
/// first ([`reclaim`]). A port found taken is left out and another tried,
/// until the range is exhausted. API failures other than a conflict end
/// it (the caller decides whether to try again).
pub async fn reserve_free(
    api: &Api<Lease>,
    ip: IpAddr,
    range: &RangeInclusive<u16>,
    watched: &[Reservation],
    holder: &Holder,
    quarantine: &ports::Quarantine,
) -> Result<ports::Pick, ReserveError> {
    let mut used: BTreeSet<u16> = watched.iter().map(|r| r.port).collect();
    let mut resting: BTreeMap<u16, &Reservation> = (watched.iter())
        .filter(|r| r.released_at.is_some())
        .map(|r| (r.port, r))
        .collect();
    loop {
        let pick = {
            let mut rng = rand::rng();
            let candidates = resting.values().filter_map(|r| r.resting());
            ports::pick(
                range,
                &|p| used.contains(&p),
                candidates,
                quarantine,
                &mut rng,
            )
            .ok_or_else(|| ReserveError::Full(range.clone()))?
        };
        let port = pick.port();
        let api_error = |source| ReserveError::Api { port, source };
        let reclaimed = match resting.remove(&port) {
            Some(r) => reclaim(api, r).await.map_err(api_error)?,
            None => true,
        };
        if reclaimed
            && create(api, &build_picked(ip, &pick, holder))
                .await
                .map_err(api_error)?
        {
            return Ok(pick);
        }
        used.insert(port);
    }
}
