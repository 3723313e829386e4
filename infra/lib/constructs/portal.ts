import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { TernSettings } from '../settings';

export interface PortalProps {
  readonly settings: TernSettings;
}

/**
 * What the customer portal keeps (issue 19), besides what the API reads anyway:
 *
 * - a table (settings.json `tables.portal`) of the API's short-lived records: used portal links
 *   (`link#<session id>`, a conditional PutItem: a link opens once), per-tenant rate-limit
 *   windows (`rl#<scope>#<window>`, a conditional ADD) and the records of Idempotency-Keys
 *   (`idem#<tenant>#<key hash>`, issue 28: every POST of the API honours the header, so the
 *   table is deployed whether or not the portal's pages are used), every item with a TTL.
 *   On-demand always: a few writes per portal session or keyed request. Nothing in it
 *   outlives a day, so it is destroyed with the stack.
 * - the key ring that signs portal links and session cookies (HMAC-SHA256), in Secrets
 *   Manager: generated at deployment as one key `{"id":"k1","secret":<64 characters>}`.
 *   `SecretsManagerKeys::rotate` (tern_aws::portal) puts a new key in front and keeps the
 *   previous one verifying, so live links and sessions survive a rotation.
 */
export class Portal extends Construct {
  public readonly table: dynamodb.Table;
  public readonly keys: secretsmanager.Secret;

  constructor(scope: Construct, id: string, props: PortalProps) {
    super(scope, id);
    const t = props.settings.tables.portal;
    this.table = new dynamodb.Table(this, 'Table', {
      partitionKey: { name: t.partitionKey, type: dynamodb.AttributeType.STRING },
      timeToLiveAttribute: t.ttlAttribute,
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.keys = new secretsmanager.Secret(this, 'Keys', {
      description: 'Tern customer portal: HMAC keys of portal links and sessions (newest signs, the previous still verifies)',
      generateSecretString: {
        secretStringTemplate: JSON.stringify({ id: 'k1' }),
        generateStringKey: 'secret',
        passwordLength: 64,
        excludePunctuation: true,
      },
      removalPolicy: RemovalPolicy.DESTROY,
    });
  }
}
