//! Publishes an `order.paid` event in the same transaction as its order row.
//!
//! Run it against local mode:
//!
//! ```sh
//! cargo run -p tern-cli --features local --bin tern -- local --time-scale 0.01 &   # writes .tern/local.env
//! source .tern/local.env
//! cargo run -p tern-outbox --example publish -- tnt_me '{"order_id":"o_1","amount_cents":4200}'
//! cargo run -p tern-outbox --example publish -- tnt_me @big-payload.json        # relative to the working directory
//! cargo run -p tern-outbox --example publish -- tnt_me @/tmp/big-payload.json   # or absolute
//! ```
//!
//! Errors are printed as one readable line (`error: ...`) with exit code 1.
//!
//! or against your account with `TERN_OUTBOX_TABLE` set to the stack's `OutboxTableName` output
//! (the example creates its own `ORDERS_TABLE`, default `tern-example-orders`, if it is missing).

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put,
    ScalarAttributeType, TransactWriteItem,
};
use tern_outbox::{OutboxWriter, failed_condition_at, payload_argument};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Display, not Debug: "error: cannot read the payload file x.json: No such file...".
    match publish().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn publish() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tenant = args.next().unwrap_or_else(|| "tnt_example".into());
    let payload = match args.next() {
        Some(arg) => payload_argument(&arg)?,
        None => r#"{"order_id":"o_1","amount_cents":4200}"#.into(),
    };
    let outbox_table = std::env::var("TERN_OUTBOX_TABLE")
        .map_err(|_| "set TERN_OUTBOX_TABLE (source .tern/local.env)")?;
    let orders_table =
        std::env::var("ORDERS_TABLE").unwrap_or_else(|_| "tern-example-orders".into());

    // Validate the event first: a bad payload never reaches the database.
    let event = OutboxWriter::new(&outbox_table).prepare("order.paid", &tenant, payload)?;

    let aws = aws_config::load_from_env().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    ensure_orders_table(&dynamodb, &orders_table)
        .await
        .map_err(|e| format!("cannot reach DynamoDB (is `tern local` running?): {e}"))?;
    let order = Put::builder()
        .table_name(&orders_table)
        .item("order_id", AttributeValue::S(event.event.id.to_string()))
        .item("status", AttributeValue::S("paid".into()))
        .build()?;
    let result = dynamodb
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(order).build())
        .transact_items(event.transact_item()?)
        .send()
        .await;
    match result {
        Ok(_) => println!(
            "published {} (type order.paid, tenant {tenant})",
            event.event.id
        ),
        Err(e) if failed_condition_at(&e, 1) => {
            println!("event {} already exists; nothing written", event.event.id)
        }
        Err(e) => {
            return Err(aws_sdk_dynamodb::error::DisplayErrorContext(e)
                .to_string()
                .into());
        }
    }
    Ok(())
}

async fn ensure_orders_table(
    dynamodb: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    if dynamodb
        .describe_table()
        .table_name(name)
        .send()
        .await
        .is_ok()
    {
        return Ok(());
    }
    dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("order_id")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("order_id")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await
        .map_err(|e| aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())?;
    Ok(())
}
