import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import { Construct } from 'constructs';
import { TableSettings, TernSettings } from '../settings';

export interface StorageProps {
  readonly settings: TernSettings;
  /** Keep the tables when the stack is deleted or a table is replaced. */
  readonly retainData: boolean;
}

/**
 * The three DynamoDB tables. All are on-demand, encrypted with the AWS managed
 * key and have point-in-time recovery: the outbox and the attempt log are
 * the record of what was promised and what was done.
 */
export class Storage extends Construct {
  /** Written by the application in its own transactions; its stream (NEW_IMAGE) feeds the relay. */
  public readonly outbox: dynamodb.Table;
  /** Endpoints and subscriptions per tenant. */
  public readonly endpoints: dynamodb.Table;
  /** One item per delivery attempt (and a delivered marker per event and endpoint). */
  public readonly attempts: dynamodb.Table;

  constructor(scope: Construct, id: string, props: StorageProps) {
    super(scope, id);
    const removalPolicy = props.retainData ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY;
    const t = props.settings.tables;
    this.outbox = this.table('Outbox', t.outbox, removalPolicy);
    this.endpoints = this.table('Endpoints', t.endpoints, removalPolicy);
    this.attempts = this.table('Attempts', t.attempts, removalPolicy);
  }

  private table(id: string, s: TableSettings, removalPolicy: RemovalPolicy): dynamodb.Table {
    return new dynamodb.Table(this, id, {
      partitionKey: { name: s.partitionKey, type: dynamodb.AttributeType.STRING },
      sortKey: s.sortKey ? { name: s.sortKey, type: dynamodb.AttributeType.STRING } : undefined,
      timeToLiveAttribute: s.ttlAttribute,
      stream: s.streamViewType ? dynamodb.StreamViewType[s.streamViewType] : undefined,
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      removalPolicy,
    });
  }
}
