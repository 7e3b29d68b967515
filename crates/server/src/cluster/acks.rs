//! Write acknowledgements: waiting, under `--ack last-write`, for the backups of each written
//! region to hold the writes, and (etcd mode) reporting to the master the backups that stayed
//! silent.

use super::ClusterNode;

impl ClusterNode {
    /// Waits for the backups of each region to hold the writes up to its LSN; false if a
    /// backup of the group did not acknowledge in time (etcd mode: the writes must not be
    /// acknowledged; with a file, such a backup is given up and the writes go on).
    pub async fn wait_acked(&self, writes: &[(u32, u64)]) -> bool {
        if !self.last_write {
            return true;
        }
        // One wait per region, for its highest LSN (a pipeline lists a region many times).
        let mut latest: Vec<(u32, u64)> = Vec::new();
        for &(r, lsn) in writes {
            match latest.iter_mut().find(|(x, _)| *x == r) {
                Some(e) => e.1 = e.1.max(lsn),
                None => latest.push((r, lsn)),
            }
        }
        for (r, lsn) in latest {
            if self.control.is_some() {
                match self.shipper.wait_all_acked(r, lsn).await {
                    Err(silent) => {
                        self.report_silent(r, silent);
                        return false;
                    }
                    // Every backup holds the write: it stands, though a handoff may have ended
                    // this node's role right after (the new primary is one of them).
                    Ok(true) => {}
                    // A link that stopped ended the wait: a backup removed from the group (the
                    // write goes on without it), or every link, because this node no longer
                    // leads the region (a primary paused past its lease). Then nobody may hold
                    // the write.
                    Ok(false) if !self.shipper.leads(r) => return false,
                    Ok(false) => {}
                }
            } else {
                self.shipper.wait_acked(r, lsn).await;
            }
        }
        true
    }

    /// etcd mode: tells the master that these backups of `region` did not acknowledge in time
    /// (once per backup and epoch); the master removes them from the group.
    fn report_silent(&self, region: u32, silent: Vec<String>) {
        let Some(s) = self.control.clone() else { return };
        let Some(epoch) = self.shipper.epoch(region) else { return };
        for node in silent {
            if !self.reported.lock().insert((region, node.clone(), epoch)) {
                continue;
            }
            tracing::warn!(region, backup = %node, epoch, "backup did not acknowledge in time; reporting it to the master");
            let rep = halyard_control::Report { region, node, epoch, by: self.name.clone() };
            let s = s.clone();
            tokio::spawn(async move {
                if let Err(e) = s.report(&rep).await {
                    tracing::warn!("cannot report a silent backup to etcd: {e}");
                }
            });
        }
    }
}
