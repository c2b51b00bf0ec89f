//! Lambda `sweep`: on a schedule, re-enqueues orphaned tasks and purges expired ones.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use mcp_tasks_core::aws::lambda::{
    Config, Ports, Role, SweepReport, Sweeper, block_on, flush_metrics, init_logging,
    prefer_one_cert_bundle, request_deadline,
};

async fn handler(
    sweeper: &Sweeper,
    event: LambdaEvent<EventBridgeEvent>,
) -> Result<SweepReport, Error> {
    // Within the invocation's deadline (under `cargo lambda watch`, which sends one already
    // past, the deployed timeout's): a sweep cut short resumes in the next run.
    let deadline = request_deadline(event.context.deadline(), Role::Sweep);
    let report = sweeper.run(Some(deadline)).await;
    flush_metrics("sweep");
    Ok(report?)
}

fn main() -> Result<(), Error> {
    // SAFETY: first thing in the process, before any thread (the runtime's) exists.
    unsafe { prefer_one_cert_bundle() };
    block_on(serve())
}

async fn serve() -> Result<(), Error> {
    init_logging();
    let config = Config::from_env(Role::Sweep)?;
    let sweeper = &Sweeper::new(&config, &Ports::connect(&config).await);
    run(service_fn(move |event| handler(sweeper, event))).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::Context;

    #[tokio::test]
    async fn the_sample_schedule_event_runs_a_sweep() {
        let config = Config::from_lookup(Role::Sweep, |k| match k {
            "TABLE_NAME" => Some("tasks".into()),
            "QUEUE_URL" => Some("http://127.0.0.1:1/000000000000/work".into()),
            _ => None,
        })
        .unwrap();
        let sweeper = Sweeper::new(&config, &Ports::in_memory().0);
        let event =
            serde_json::from_str(include_str!("../../../events/scheduled-sweep.json")).unwrap();
        let report = handler(&sweeper, LambdaEvent::new(event, Context::default()))
            .await
            .unwrap();
        // An empty store: nothing to do, and the pass is complete.
        assert_eq!(
            report,
            SweepReport {
                complete: true,
                ..SweepReport::default()
            }
        );
    }
}
