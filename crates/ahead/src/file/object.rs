//! Opening objects in a store as [`File`]s (see [`crate::remote`]): the
//! engine's runtime and remote backend, started on first use.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use super::engine::{Engine, Shared};
use super::{File, Kind, Parts};
use crate::ra::{self, RaConfig};
use crate::remote::{DiskTier, ObjectSource, RemoteStats, Runtime};
use crate::{Error, Result};

impl Engine {
    /// Opens the object a URL names (`s3://bucket/key`, `http(s)://…`),
    /// with credentials, region and endpoint from the standard `AWS_*`
    /// environment, for reading through the engine's cache as a Direct
    /// file is read. Its size and ETag are taken now; reads are held to
    /// that version (see [`crate::remote`]).
    pub fn open_url(&self, url: &str) -> Result<File> {
        self.open_url_with(url, &[])
    }

    /// [`Engine::open_url`] with object_store configuration `options`
    /// over the environment (see [`crate::remote::store_for_url_with`]):
    /// `[("endpoint", "http://…"), ("allow_http", "true")]`.
    pub fn open_url_with(&self, url: &str, options: &[(String, String)]) -> Result<File> {
        let (store, path) = crate::remote::store_for_url_with(url, options)
            .map_err(|e| Error::io("open", url.as_ref(), None, e))?;
        self.open_object(store, path, url)
    }

    /// Opens `path` in a store the caller configured; `name` names it in
    /// errors and [`File::path`].
    pub fn open_object(
        &self,
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
        name: &str,
    ) -> Result<File> {
        self.open_object_as(store, path, name, None)
    }

    /// [`Engine::open_object`] as a listing described the object, its
    /// `size` and `e_tag`, without asking the store (the HEAD an open
    /// costs: a round trip, 30 ms on S3). Reads are held to that ETag as
    /// to one an open found: if the object was replaced since it was
    /// listed, they fail (`ESTALE`) rather than mix versions. For a caller
    /// that listed moments ago and accepts that (a mount within its
    /// metadata TTL).
    pub fn open_object_listed(
        &self,
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
        name: &str,
        size: u64,
        e_tag: &str,
    ) -> Result<File> {
        self.open_object_as(store, path, name, Some((size, e_tag.to_owned())))
    }

    fn open_object_as(
        &self,
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
        name: &str,
        listed: Option<(u64, String)>,
    ) -> Result<File> {
        let shared = &self.shared;
        // Kept past its close only if its version came from the store at
        // this open (a HEAD): a listing's may be as old as its TTL.
        let identity = listed.is_none().then(|| object_identity(&*store, name));
        let runtime = shared
            .runtime()
            .map_err(|e| Error::io("start the remote runtime", name.as_ref(), None, e))?;
        let object = ObjectSource::open(
            store,
            path,
            name.to_owned(),
            runtime,
            shared.tier.clone(),
            listed,
        )
        .map_err(|e| Error::io("open", name.as_ref(), None, e))?;
        let object = Arc::new(object);
        // What the open's HEAD found: one round trip, not two.
        let stamp = object.known_version();
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        // With no ETag there is no version to hold kept pages to.
        let keep_as = identity.filter(|_| stamp.tag != 0);
        let id = shared.cache.open(id, stamp, keep_as);
        let kind = shared.config.policy;
        let policy = ra::new_policy(kind, RaConfig::with_max_pages(shared.max_ra_pages));
        Ok(File::assemble(Parts {
            engine: shared.clone(),
            id,
            path: PathBuf::from(name),
            kind: Kind::Object(object),
            policy,
            stamp,
            keep_as,
        }))
    }
}

/// An object's identity for the pages kept past its close: 128 bits of
/// hash of its store and name (its version, size and ETag, is checked
/// apart, at each open).
fn object_identity(store: &dyn ObjectStore, name: &str) -> crate::cache::Identity {
    use std::hash::{Hash, Hasher};
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, store.to_string(), name).hash(&mut h);
        h.finish()
    };
    (half(1), half(2))
}

impl Shared {
    /// The engine's runtime for object requests, started on first use.
    fn runtime(&self) -> std::io::Result<Arc<Runtime>> {
        if let Some(rt) = self.runtime.get() {
            return Ok(rt.clone());
        }
        let rt = Arc::new(Runtime::new(self.config.depth)?);
        Ok(self.runtime.get_or_init(|| rt).clone())
    }
}

impl Engine {
    /// The engine's disk tier for objects ([`EngineConfig::with_cache_dir`](super::engine::EngineConfig::with_cache_dir)), if it has one.
    pub fn disk_tier(&self) -> Option<&Arc<DiskTier>> {
        self.shared.tier.as_ref()
    }
}

impl File {
    /// An object's request counters; `None` for a file.
    pub fn remote_stats(&self) -> Option<RemoteStats> {
        match &self.inner.kind {
            Kind::Object(o) => Some(o.stats()),
            _ => None,
        }
    }

    /// An object's ETag, which its reads are held to, and when the store
    /// last confirmed that version: the send time of the open's HEAD or of
    /// the latest GET held to the ETag that succeeded. `None` for a file,
    /// an object without an ETag, or one opened as listed
    /// ([`Engine::open_object_listed`]) that has fetched nothing yet. A
    /// caller that caches what a listing said (a mount's metadata TTL) may
    /// count its age from here.
    pub fn confirmed(&self) -> Option<(String, std::time::Instant)> {
        match &self.inner.kind {
            Kind::Object(o) => o.confirmed(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineConfig;
    use object_store::ObjectStoreExt;

    #[test]
    fn an_object_policy_is_told_the_depth_the_engine_has_grown_to() {
        // A strided window holds as many runs as the store serves at once;
        // that number grows while a file is open, so the cost the policy
        // is told must be asked at each decision, not kept from the open.
        let engine = Engine::new(EngineConfig::default()).unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let path = ObjectPath::from("o");
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(store.put(&path, vec![7u8; 1 << 20].into()))
            .unwrap();
        let file = engine.open_object(store, path, "memory://o").unwrap();
        let first = engine.shared.runtime().unwrap().depth();
        assert_eq!(
            file.device_cost().map(|c| c.parallelism),
            Some(first as u64)
        );
        engine
            .shared
            .runtime()
            .unwrap()
            .depth_meter()
            .grow(first * 3);
        assert_eq!(
            file.device_cost().map(|c| c.parallelism),
            Some(3 * first as u64)
        );
    }
}
