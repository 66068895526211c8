//! The calls the Lease loop ([`super::leases`]) makes on the API server,
//! each given up after `--announce-renew` so a stalled API server cannot
//! hold the loop: read an SSH IP's Lease, write it (what is written is
//! [`super::lease_write`]'s), and tell a takeover in an Event.

use std::{net::IpAddr, time::Duration};

use anyhow::Context as _;
use k8s_openapi::{
    api::{coordination::v1::Lease, events::v1::Event},
    jiff::Timestamp,
};
use kube::{Api, api::PostParams};

use super::{
    lease_name::lease_name,
    lease_write::{LeaseWrite, Write, takeover_event},
};

/// The Leases' and the Events' API, and what every call needs.
pub struct LeaseIo {
    leases: Api<Lease>,
    events: Api<Event>,
    namespace: String,
    me: String,
    /// Each call's limit.
    renew: Duration,
    /// The Lease duration written.
    seconds: i32,
}

impl LeaseIo {
    /// Calls as `me`, in `namespace`, each given up after `renew`,
    /// writing Leases of `duration`.
    pub fn new(
        leases: &Api<Lease>,
        events: Api<Event>,
        namespace: &str,
        me: &str,
        renew: Duration,
        duration: Duration,
    ) -> Self {
        Self {
            leases: leases.clone(),
            events,
            namespace: namespace.to_owned(),
            me: me.to_owned(),
            renew,
            seconds: i32::try_from(duration.as_secs()).unwrap_or(i32::MAX),
        }
    }

    /// The Lease `name` as the API server has it now (`None`: absent).
    pub async fn read(&self, name: &str) -> anyhow::Result<Option<Lease>> {
        tokio::time::timeout(self.renew, self.leases.get_opt(name))
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {:?}", self.renew))?
            .with_context(|| format!("reading Lease {}/{name}", self.namespace))
    }

    /// One write of the Lease `name` for `ip`, made from `lease` as last
    /// read (`None`: created), naming the MACs this node answers from.
    pub async fn write(
        &self,
        lease: Option<&Lease>,
        name: &str,
        ip: IpAddr,
        how: Write,
        macs: &str,
    ) -> anyhow::Result<()> {
        let write = LeaseWrite {
            name,
            ip,
            me: &self.me,
            seconds: self.seconds,
            macs,
            now: Timestamp::now(),
        };
        let body = write.lease(lease, how);
        let params = PostParams::default();
        let call = async {
            match lease {
                None => self.leases.create(&params, &body).await.map(drop),
                Some(_) => self.leases.replace(name, &params, &body).await.map(drop),
            }
        };
        tokio::time::timeout(self.renew, call)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {:?}", self.renew))?
            .with_context(|| format!("Lease {}/{name}", self.namespace))
    }

    /// An Event on `ip`'s Lease saying this node took it over, sent in the
    /// background: nothing waits for it, and a failure is only logged.
    pub fn tell_takeover(&self, ip: IpAddr) {
        let event = takeover_event(
            &self.namespace,
            &self.me,
            &lease_name(ip),
            ip,
            Timestamp::now(),
        );
        let events = self.events.clone();
        tokio::spawn(async move {
            let params = PostParams::default();
            let sent = events.create(&params, &event);
            match tokio::time::timeout(Duration::from_secs(5), sent).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "the takeover's event was not recorded"),
                Err(_) => tracing::debug!("the takeover's event was not recorded in 5 s"),
            }
        });
    }
}
