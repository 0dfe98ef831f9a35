//! What the Reflector logs when the server fails: one line per failed attempt, saying how
//! long it waits before the next.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::Status;
use kubeplug_memory::{Call, Fault, MemoryServer};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt as _};

/// The warnings of the Reflector, each as its fields' names.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<Vec<String>>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() != tracing::Level::WARN || !meta.target().ends_with("reflector") {
            return;
        }
        struct Names(Vec<String>);
        impl Visit for Names {
            fn record_debug(&mut self, field: &Field, _: &dyn std::fmt::Debug) {
                self.0.push(field.name().to_owned());
            }
        }
        let mut names = Names(Vec::new());
        event.record(&mut names);
        self.0.lock().unwrap().push(names.0);
    }
}

#[tokio::test(start_paused = true)]
async fn each_failed_list_is_one_warning_with_the_back_off() {
    let warnings = Warnings::default();
    let _logging =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let pods = Resource::new("", "v1", "Pod", "pods", true);
    let server = MemoryServer::new();
    server.inject(Fault::Fail {
        call: Call::List,
        times: 3,
        status: Status::new(503, "ServiceUnavailable", "etcd is down"),
        retry_after: None,
    });
    let informer = SharedIndexInformer::new(
        Arc::new(server.lister_watcher(pods.clone(), None, None, None)),
        ObjectDecoder::new(pods),
        ReflectorConfig::default(),
    );
    informer.start();
    tokio::time::timeout(Duration::from_secs(120), informer.wait_for_sync())
        .await
        .expect("synced once the server answers");
    let warnings = warnings.0.lock().unwrap().clone();
    assert_eq!(warnings.len(), 3, "one per failed list: {warnings:?}");
    for fields in &warnings {
        assert!(
            fields.iter().any(|f| f == "retry_in"),
            "says how long until the next attempt: {fields:?}"
        );
    }
    informer.stop().await;
}
